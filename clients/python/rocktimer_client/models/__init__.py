"""Contains all the data models used in inputs/outputs"""

from .ack_request import AckRequest
from .ack_result import AckResult
from .batch_item_result import BatchItemResult
from .batch_item_result_state import BatchItemResultState
from .batch_result import BatchResult
from .cancel_result import CancelResult
from .dead_letter_detail import DeadLetterDetail
from .dead_letter_detail_body_encoding import DeadLetterDetailBodyEncoding
from .dead_letter_detail_properties import DeadLetterDetailProperties
from .dead_letter_item import DeadLetterItem
from .dead_letter_page import DeadLetterPage
from .due_ahead import DueAhead
from .exponential_policy import ExponentialPolicy
from .field_error import FieldError
from .fixed_policy import FixedPolicy
from .group_item import GroupItem
from .group_message_state import GroupMessageState
from .group_message_state_state import GroupMessageStateState
from .group_page import GroupPage
from .group_settings import GroupSettings
from .health import Health
from .identity import Identity
from .identity_role import IdentityRole
from .invisibility_request import InvisibilityRequest
from .invisibility_result import InvisibilityResult
from .lateness_summary import LatenessSummary
from .levels_policy import LevelsPolicy
from .limits import Limits
from .message_page import MessagePage
from .message_view import MessageView
from .message_view_properties import MessageViewProperties
from .message_view_state import MessageViewState
from .nack_receipt_result import NackReceiptResult
from .nack_receipt_result_status import NackReceiptResultStatus
from .nack_request import NackRequest
from .nack_result import NackResult
from .problem import Problem
from .push_settings import PushSettings
from .put_schedule import PutSchedule
from .put_schedule_body_encoding import PutScheduleBodyEncoding
from .put_schedule_properties_type_0 import PutSchedulePropertiesType0
from .receipt_result import ReceiptResult
from .receipt_result_status import ReceiptResultStatus
from .receive_request import ReceiveRequest
from .receive_result import ReceiveResult
from .received_message import ReceivedMessage
from .received_message_body_encoding import ReceivedMessageBodyEncoding
from .received_message_properties import ReceivedMessageProperties
from .redrive_result import RedriveResult
from .reschedule_message import RescheduleMessage
from .schedule_page import SchedulePage
from .schedule_view import ScheduleView
from .schedule_view_body_encoding import ScheduleViewBodyEncoding
from .schedule_view_properties import ScheduleViewProperties
from .send_batch import SendBatch
from .send_message import SendMessage
from .send_message_body_encoding import SendMessageBodyEncoding
from .send_message_properties_type_0 import SendMessagePropertiesType0
from .send_result import SendResult
from .send_result_state import SendResultState
from .stats import Stats
from .stream_messages_response_200 import StreamMessagesResponse200
from .topic_item import TopicItem
from .topic_page import TopicPage

__all__ = (
    "AckRequest",
    "AckResult",
    "BatchItemResult",
    "BatchItemResultState",
    "BatchResult",
    "CancelResult",
    "DeadLetterDetail",
    "DeadLetterDetailBodyEncoding",
    "DeadLetterDetailProperties",
    "DeadLetterItem",
    "DeadLetterPage",
    "DueAhead",
    "ExponentialPolicy",
    "FieldError",
    "FixedPolicy",
    "GroupItem",
    "GroupMessageState",
    "GroupMessageStateState",
    "GroupPage",
    "GroupSettings",
    "Health",
    "Identity",
    "IdentityRole",
    "InvisibilityRequest",
    "InvisibilityResult",
    "LatenessSummary",
    "LevelsPolicy",
    "Limits",
    "MessagePage",
    "MessageView",
    "MessageViewProperties",
    "MessageViewState",
    "NackReceiptResult",
    "NackReceiptResultStatus",
    "NackRequest",
    "NackResult",
    "Problem",
    "PushSettings",
    "PutSchedule",
    "PutScheduleBodyEncoding",
    "PutSchedulePropertiesType0",
    "ReceiptResult",
    "ReceiptResultStatus",
    "ReceivedMessage",
    "ReceivedMessageBodyEncoding",
    "ReceivedMessageProperties",
    "ReceiveRequest",
    "ReceiveResult",
    "RedriveResult",
    "RescheduleMessage",
    "SchedulePage",
    "ScheduleView",
    "ScheduleViewBodyEncoding",
    "ScheduleViewProperties",
    "SendBatch",
    "SendMessage",
    "SendMessageBodyEncoding",
    "SendMessagePropertiesType0",
    "SendResult",
    "SendResultState",
    "Stats",
    "StreamMessagesResponse200",
    "TopicItem",
    "TopicPage",
)
