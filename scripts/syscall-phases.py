#!/usr/bin/env python3
"""syscall-phases.py PERF_DATA: where a 1-in-flight round trip's time goes.

PERF_DATA is a `perf record -e raw_syscalls:sys_enter,raw_syscalls:sys_exit`
of a two-process ping-pong benchmark (the client process is the first one
recorded, the benchmark binary; the server is the process it starts), e.g.

  FERRY_BENCH_CC=cubic perf record -q -e raw_syscalls:sys_enter,raw_syscalls:sys_exit \\
      -o ferry.data -- ./msgrbench.test -test.run '^$' \\
      -test.bench 'RoundTrip/size=64/impl=ferry-await$' -test.benchtime 20000x

Each round trip is cut at its system calls: the client's write, the
server's read that returns the request, the server's reply write, the
client's read that returns the reply. Prints the median and mean of each
phase over the round trips (the first tenth left out as warm-up), and how
the server came to read each request: woken from epoll_pwait, or already
running (it was on the client's CPU, preempted by the client's wake-up).
Eventfd traffic (8-byte reads and writes: the Go netpoller's wake-ups) is
not counted as data.
"""
import re
import statistics
import subprocess
import sys

READ, WRITE, WRITEV, EPOLL_PWAIT, FUTEX = 0, 1, 20, 281, 202


def events(path):
    out = subprocess.run(['perf', 'script', '--ns', '-i', path, '-F', 'pid,tid,time,event,trace'],
                         capture_output=True, text=True, check=True).stdout
    pend, order, ev = {}, {}, []
    for line in out.splitlines():
        m = re.match(r'\s*(\d+)/(\d+)\s+([\d.]+):\s+raw_syscalls:sys_(enter|exit): NR (\d+) (.*)', line)
        if not m:
            continue
        pid, tid, t, kind, nr, rest = int(m[1]), int(m[2]), float(m[3]) * 1e6, m[4], int(m[5]), m[6]
        order.setdefault(pid, len(order))
        if kind == 'enter':
            args = rest.strip('()').split(', ')
            pend[tid] = (nr, args, t)
            if nr == WRITEV or nr == WRITE and int(args[2], 16) != 8:
                ev.append((t, pid, tid, 'write-enter', 0))
            continue
        p = pend.pop(tid, None)
        if p is None:
            continue
        ret = int(rest.split('= ')[1])
        if nr == WRITEV or nr == WRITE and int(p[1][2], 16) != 8:
            ev.append((t, pid, tid, 'write-exit', p[2]))
        elif nr == READ and ret > 0 and ret != 8:
            ev.append((t, pid, tid, 'read-data', p[2]))
        elif nr == EPOLL_PWAIT and ret > 0:
            ev.append((t, pid, tid, 'epoll', p[2]))
    ev.sort()
    client = min(order, key=order.get)
    return ev, client


def main():
    ev, client = events(sys.argv[1])
    names = [('E', 'client write system call'),
             ('A', 'client write done -> server read returns data'),
             ('B', 'server: read returned -> reply write starts'),
             ('F', 'server write system call'),
             ('C', 'server write done -> client read returns data'),
             ('D', 'client: read returned -> next write starts')]
    ph = {k: [] for k, _ in names}
    woke, running = [], []
    state, t, epolls = 'cwe', {}, []
    for tm, pid, tid, k, start in ev:
        c = pid == client
        if state == 'cwe' and c and k == 'write-enter':
            if 'cr' in t:
                ph['D'].append(tm - t['cr'])
            t, state = {'cwe': tm}, 'cwx'
        elif state == 'cwx' and c and k == 'write-exit':
            t['cwx'], state, epolls = tm, 'sr', []
            ph['E'].append(tm - t['cwe'])
        elif state == 'sr' and not c and k == 'epoll':
            epolls.append(tm)
        elif state == 'sr' and not c and k == 'read-data':
            t['sr'], state = tm, 'swe'
            ph['A'].append(tm - t['cwx'])
            (woke if epolls else running).append(tm - t['cwx'])
        elif state == 'swe' and not c and k == 'write-enter':
            t['swe'], state = tm, 'swx'
            ph['B'].append(tm - t['sr'])
        elif state == 'swx' and not c and k == 'write-exit':
            t['swx'], state = tm, 'cr'
            ph['F'].append(tm - t['swe'])
        elif state == 'cr' and c and k == 'read-data':
            t['cr'], state = tm, 'cwe'
            ph['C'].append(tm - t['swx'])
    total = 0.0
    for k, name in names:
        v = ph[k][len(ph[k]) // 10:]
        total += statistics.median(v)
        print('%-48s n=%6d p50 %6.1f µs  mean %6.1f' % (name, len(v), statistics.median(v), statistics.mean(v)))
    print('sum of the p50s %.1f µs' % total)
    for name, v in (('server woken from epoll_pwait', woke), ('server already running', running)):
        if v:
            print('  A when the %-32s %5.1f%% of round trips, p50 %5.1f µs' %
                  (name + ':', 100.0 * len(v) / (len(woke) + len(running)), statistics.median(v)))


if __name__ == '__main__':
    main()
