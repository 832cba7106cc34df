"""Exit statuses shared by every ``zactors`` command, so that scripts can tell outcomes apart.

=====  ================================================================
0      done; or a server asked to stop (Ctrl-C, SIGTERM)
1      the job failed: no reply, results missing, nothing found
2      usage: a wrong option (one line says which, and the fix)
3      nobody answered: no server at the endpoint (no handshake at all)
4      refused: the server refused our key, or security settings differ
130    interrupted by Ctrl-C (128 + SIGINT); 143 by SIGTERM
141    stdout closed early (``zactors demo | head``): a quiet stop
=====  ================================================================
"""

__all__ = ["OK", "FAILED", "USAGE", "NO_ANSWER", "REFUSED"]

OK = 0
FAILED = 1
USAGE = 2
NO_ANSWER = 3
REFUSED = 4
