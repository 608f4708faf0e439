"""One tf.data service process for tests/pipeline/test_data_service.py: a dispatcher, or a worker of one.

    python data_service_worker.py dispatcher PORT WORK_DIR
    python data_service_worker.py worker PORT DISPATCHER_HOST:PORT

Prints "ready" once serving, then serves until killed. The dispatcher keeps the
datasets clients register with it under WORK_DIR/datasets.
"""

import sys

import tensorflow as tf


def main():
    kind, port = sys.argv[1], int(sys.argv[2])
    service = tf.data.experimental.service
    if kind == "dispatcher":
        server = service.DispatchServer(service.DispatcherConfig(port=port, work_dir=sys.argv[3]))
    else:
        server = service.WorkerServer(service.WorkerConfig(
            dispatcher_address=sys.argv[3], worker_address=f"127.0.0.1:{port}", port=port))
    print("ready", flush=True)
    server.join()


if __name__ == "__main__":
    main()
