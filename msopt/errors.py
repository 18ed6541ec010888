"""The two ways a command ends early: bad input (exit 2) and a failed check (exit 1)."""


class InputError(Exception):
    """The user's input cannot be used: the message is one line naming the problem."""

    exit_code = 2


class CheckFailed(Exception):
    """A verification or check ran and failed."""

    exit_code = 1


class VerifyFailed(CheckFailed):
    """The rewritten model's outputs differ from the original's: ``document`` is the partition report."""

    def __init__(self, message, document):
        super().__init__(message)
        self.document = document
