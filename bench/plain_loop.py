"""The ceiling of the side-by-side benchmark: a plain confluent-kafka consume-and-produce loop, no windowing.

    .venv/bin/python bench/plain_loop.py --bootstrap-servers HOST:PORT --input-topic IN --output-topic OUT

Reads every record of IN from the beginning (a fresh consumer group) and writes its key and value unchanged to OUT
(one Python process, one thread). Prints ``consumed N`` to stdout every 250 ms, which bench/side_by_side.py reads.
Runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--input-topic", required=True)
    ap.add_argument("--output-topic", required=True)
    ap.add_argument("--batch", type=int, default=1000, help="records per consume() call")
    args = ap.parse_args()

    from confluent_kafka import Consumer, Producer

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    c = Consumer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "group.id": f"plain-loop-{time.time_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "fetch.wait.max.ms": 50,
        }
    )
    p = Producer({"bootstrap.servers": args.bootstrap_servers, "linger.ms": 5, "queue.buffering.max.messages": 1000000})
    c.subscribe([args.input_topic])
    consumed = 0
    last = 0.0
    while not stop:
        for m in c.consume(args.batch, timeout=0.1):
            if m.error():
                continue
            consumed += 1
            while True:
                try:
                    p.produce(args.output_topic, key=m.key(), value=m.value())
                    break
                except BufferError:
                    p.poll(0.05)
        p.poll(0)
        now = time.monotonic()
        if now - last >= 0.25:
            print(f"consumed {consumed}", flush=True)
            last = now
    p.flush(30)
    print(f"consumed {consumed}", flush=True)
    c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
