"""Process-wide state shared by the executor and the main loop."""


class Backend:
    # receives in flight: OngoingRecv records, filled by the executor, reaped by the main loop
    ongoing_reqs = []
