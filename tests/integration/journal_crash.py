"""The journal client as a process that crashes on purpose.

``python -m tests.integration.journal_crash N`` consumes like ``revisit journal``
and exits abruptly (code ``EXIT_CODE``) right after its Nth batch's transactions
commit, before the Redis update and the offset commit: the worst moment for a
crash, which the crash test proves harmless.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

from actors.journal import JournalClient
from app.settings import Settings

EXIT_CODE = 75


def main() -> None:
    limit = int(sys.argv[1])
    done = 0

    def after_transaction() -> None:
        nonlocal done
        done += 1
        if done >= limit:
            os._exit(EXIT_CODE)

    logging.basicConfig(level=logging.INFO)
    JournalClient(Settings(), after_transaction=after_transaction).run(threading.Event())


if __name__ == "__main__":
    main()
