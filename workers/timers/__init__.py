"""Timer kinds: everything that must happen later is a timer key (architecture.md).

A timer key is ``u64be(due_ms) ‖ target ‖ 0x00 ‖ ident`` (storage/keys.py); its target
says its kind: a topic for a scheduled message, a reserved prefix (``%INVISIBLE%``,
``%RETRY%``, ``%SCHEDULE%``) for the internal ones. Each kind has one module here that
owns its key and value codec and its fire action; ``move.py`` fires a scanned span of
keys through one table and removes the span, all in one batch.
"""
