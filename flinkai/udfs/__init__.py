"""The PyFlink UDF modules that SQL jobs name, shipped with the package.

SQL refers to them by module name, e.g. ``'vectorizer.text_to_vector'``: the runner
ships this folder to the workers through ``python.files`` (and puts it on the
client's path), so each module is top-level there. A ``udfs/`` folder beside a job's
``jobs/`` folder replaces this one (see :func:`flinkai.runtime.runner.default_udf_dirs`).
These modules are the top of the import graph: nothing in flinkai imports them.
"""
