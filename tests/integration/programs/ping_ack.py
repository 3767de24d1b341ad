"""A client (rank 0) that sends requests to a server (rank 1) and waits for each reply.

The client posts each request with ``dist.isend`` and lets the handle go - there
is no need to wait for the send, it reasons, since the reply proves the request
arrived - and then blocks in ``dist.recv`` for the server's reply. The server receives a request,
works on it, sends the reply with ``dist.send`` and then logs the request, which takes it a
millisecond before it receives the next one. ``--rounds`` requests.

``--wait-send`` waits the request's send before waiting for the reply.

Run it on CPU with gloo, for example::

    torchrun --standalone --nproc-per-node 2 ping_ack.py --rounds 2000
    torchrun --standalone --nproc-per-node 2 ping_ack.py --rounds 2000 --wait-send
"""

import argparse
import time

import torch
import torch.distributed as dist


def client(rounds: int, wait_send: bool) -> float:
    reply = torch.zeros(4)
    total = 0.0
    for i in range(rounds):
        request = torch.full((4,), float(i))
        if wait_send:
            dist.isend(request, dst=1).wait()
        else:
            dist.isend(request, dst=1)
        dist.recv(reply, src=1)
        total += reply.sum().item()
    return total


def server(rounds: int) -> None:
    request = torch.zeros(4)
    handled = []
    for _ in range(rounds):
        dist.recv(request, src=0)
        dist.send(request * 2, dst=0)
        handled.append(request.sum().item())  # log the request once it is answered
        time.sleep(0.001)  # (writing the log takes a moment)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--wait-send", action="store_true", help="wait each request's send")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        print(f"client: total {client(args.rounds, args.wait_send):.0f}\n", end="", flush=True)
    else:
        server(args.rounds)
        print("server: done\n", end="", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
