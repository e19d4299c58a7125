"""
Running the audit's independent Spark jobs a few at a time, from driver
threads.
"""

#: How many of the audit's jobs run at once by default: enough that a
#: job of few tasks, the last tasks of a stage or the driver planning and
#: collecting between jobs leave no core idle, few enough that the jobs'
#: working memory stays that of a few (every table's writer at once, some
#: fourteen jobs, raised the peak).
WORKERS = 3


def run_all(tasks, workers: int = WORKERS) -> list:
    """
    Run the C{tasks} (functions without arguments), at most C{workers} at
    once, each in a driver thread, starting them in their order; return
    what each returned, in their order.  After a failure no further task
    starts, and the first failure is raised once the running tasks end.

    Spark's scheduler takes jobs from several threads, and a job's
    description (C{setJobDescription}) is its thread's.
    """
    import threading

    from pyspark import InheritableThread

    tasks = list(tasks)
    results = [None] * len(tasks)
    failures: list[BaseException] = []
    claim = threading.Lock()
    pending = iter(enumerate(tasks))

    def worker():
        while True:
            with claim:
                if failures:
                    return
                index, task = next(pending, (None, None))
            if task is None:
                return
            try:
                results[index] = task()
            except BaseException as e:  # re-raised in the caller's thread
                with claim:
                    failures.append(e)
                return

    threads = [InheritableThread(target=worker, daemon=True)
               for _ in range(max(1, min(workers, len(tasks))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return results
