"""The ``rubricforge`` command: a thin shell of argparse over the library (the only place argparse lives).

In: the command line. Out: a library call, its output on stdout, and an exit code (0; 2 for an
`InputError`; 3 for a `ServerError`; 4 for `AnswerIsNo`; 1 for a bug, with its traceback; 130 on Ctrl-C).

Modules:

- :mod:`.main`: the parser, the ``cmd_*`` commands and `main` (the console entry point, the one place
  the package's errors become exit codes);
- :mod:`.judge`: ``judge`` (local, ``--ray``, ``--batch-api``);
- :mod:`.trust`: ``certify``, ``show``, ``gate``, ``label-next``;
- :mod:`.floor`: ``floor``;
- :mod:`.data_options`: ``--data --format --label-threshold --labels --skip-bad`` and the load they do;
- :mod:`.lm_options`: the LM flags and the LMs they configure;
- :mod:`.presets`: ``--preset`` and the render flags.

Nothing is re-exported, so that ``rubricforge --help`` imports only what it needs.
"""

__all__: list[str] = []
