"""An IPython config file, passed by the in-place restart to the new process (``--config``, see ``reexec``).

IPython reads config files before ipykernel binds its sockets and starts its iopub thread, which is the one
moment to start watching iopub subscriptions (ipykernel 7's welcome messages; on 6 the socket is made an XPUB that
hands them up): a client that subscribes before the extension loads would otherwise go unseen, and the restart
could not tell a subscribed client from a merely connected one (``iopub_clients.clients_are_back``). It sets no
option.
"""

from nb_cudaguard.relaunch.iopub_clients import watch_subscriptions_from_start

watch_subscriptions_from_start()
