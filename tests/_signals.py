"""For tests that interrupt a child process as a terminal's Ctrl-C does."""
import signal


def terminal_sigint():
    """``preexec_fn`` of the child: SIGINT as a terminal's foreground job has it (a suite started in the
    background with ``cmd &`` passes SIGINT on ignored, and Python then keeps ignoring it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
