"""`rubricforge review` as a command: it prints the URL with its token once the page accepts connections,
serves it, and stops on Ctrl-C (SIGINT) with the labels file released. (The integrator registers
`add_review_parser` in `cli.main`; this test builds the parser itself.)"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import httpx

from tests.review.conftest import DEMO_DATA, DEMO_PROGRAM, DEMO_RUN, DEMO_VERDICTS, ROOT

SCRIPT = textwrap.dedent("""
    import argparse, sys, warnings
    warnings.simplefilter("ignore")
    from rubricforge_dspy.cli.review import add_review_parser
    parser = argparse.ArgumentParser()
    add_review_parser(parser.add_subparsers())
    args = parser.parse_args(sys.argv[1:])
    sys.exit(args.func(args))
""")


def test_the_command_prints_the_tokened_url_serves_it_and_stops_on_ctrl_c(tmp_path):
    labels = tmp_path / "labels.jsonl"
    command = [sys.executable, "-c", SCRIPT, "review", "--data", str(DEMO_DATA), "--verdicts", str(DEMO_VERDICTS),
               "--program", str(DEMO_PROGRAM), "--allow-unverified-program", "--run-dir", str(DEMO_RUN),
               "--labels-out", str(labels), "--labeler", "cli"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()  # printed once the server accepts connections: the readiness check
        assert line.startswith("review page (Ctrl-C to stop): http://127.0.0.1:"), (line, process.stderr.read())
        url = line.split(": ", 1)[1].strip()
        assert "?token=" in url
        with httpx.Client(follow_redirects=True, timeout=30) as client:
            page = client.get(url)
            assert page.status_code == 200 and "0 of 4 labeled" in page.text
            assert httpx.get(url.split("?")[0], timeout=30).status_code == 403  # without the token
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
    assert not (tmp_path / "labels.jsonl.lock").exists()  # released


def test_labels_out_naming_a_csv_labels_file_exits_2_before_any_write(tmp_path, capsys):
    from rubricforge_dspy.cli.main import main

    labels = tmp_path / "labels.csv"
    labels.write_text("id,label\ndemo-gpt-4o-airline:0:0,1\n")
    before = labels.read_bytes()
    code = main(["review", "--data", str(DEMO_DATA), "--verdicts", str(DEMO_VERDICTS), "--program", str(DEMO_PROGRAM),
                 "--allow-unverified-program", "--labels-out", str(labels), "--labeler", "cli"])
    err = capsys.readouterr().err
    assert code == 2 and f"{labels}" in err and "not a labels journal" in err and "Traceback" not in err
    assert labels.read_bytes() == before and list(tmp_path.iterdir()) == [labels]
