"""``make soak`` (``python -m soak``): a long randomised fault run of a whole install.

Two dispatchers, two schedulers and several workers run as real processes on a private
PostgreSQL, each role's database link through a TCP proxy of its own. While thousands
of runs are enqueued and worked, the roles are killed with SIGKILL, workers are stopped
(SIGSTOP) past their leases, PostgreSQL is stopped immediately and started again, and
links are partitioned and reset, at random. At the end every fault is healed and the
run is checked: no run lost, no run finished twice, no stale completion accepted, the
DLQ exactly the runs that had to die, every cron minute run once, every role alive and
never exited on its own. The summary says what was checked; any violation exits 1.

It uses the fault tools of the test suite (``tests/faults``: the private PostgreSQL
and the proxy). Not part of ``make test``: it takes minutes.
"""
