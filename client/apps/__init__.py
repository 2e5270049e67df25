"""Applications built on the client's protocol layers: classic file transfer (transfer, receive, progress),
Dilated file transfer and its CLI, port forwarding, and the relay probes behind `burrow relay-probe`."""
