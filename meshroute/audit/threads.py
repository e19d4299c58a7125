"""
Running the audit's independent steps at once, each in a driver thread.
"""


def concurrently(*steps):
    """
    Run the C{steps} (functions without arguments) each in a thread of its
    own, and yield what each returns, in their order, as soon as it and
    those before it are done; raise the first step's exception, if any,
    once every step has ended.

    A step's Spark jobs leave cores idle: a job of few tasks, the last
    tasks of a stage, the driver planning and collecting between jobs;
    independent steps run at once keep every core busy.  Spark's
    scheduler takes jobs from several threads, and a job's description
    (C{setJobDescription}) is its thread's.
    """
    from pyspark import InheritableThread

    results = [None] * len(steps)

    def runner(index, step):
        def run_step():
            try:
                results[index] = (True, step())
            except BaseException as e:  # re-raised in the caller's thread
                results[index] = (False, e)
        return run_step

    threads = [InheritableThread(target=runner(i, step), daemon=True)
               for i, step in enumerate(steps)]
    for thread in threads:
        thread.start()
    try:
        for index, thread in enumerate(threads):
            thread.join()
            ok, value = results[index]
            if not ok:
                raise value
            yield value
    finally:
        for thread in threads:
            thread.join()
