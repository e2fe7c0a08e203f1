"""``--msa-server``: the MMseqs2 MSA server client (ColabFold's protocol) against a stand-in server on 127.0.0.1
(a ``http.server`` thread in the test implementing submit / poll / download; nothing leaves the machine): a
queued ticket (PENDING, RUNNING, COMPLETE), a rate-limited one, a failed one (ERROR), and ``predict`` end to end
(the MSA used equals the served A3M; a failed ticket fails its target in one line and the batch continues)."""

import http.server
import io
import json
import re
import socket
import tarfile
import threading
import urllib.parse

import pytest
import torch

from alphafold_mem import AlphaFold, model_config
from alphafold_mem.cli import main
from alphafold_mem.data.msa import parse_a3m_string, parse_msa
from alphafold_mem.predict import stages
from alphafold_mem.predict.targets import Target
from alphafold_mem.search import msa_server
from alphafold_mem.search.msa_server import MODES, MsaServerError, MsaServerOptions, cache_key, fetch_server_msa
from alphafold_mem.weights import save_checkpoint

from .conftest import REPO_DATA
from .predict_cli import prediction, ranked

SEQ = "MKPVTLYDVAEYAGVSYQTVSRVVNQASHVSAKTREKVEAAMAELNYIPNR"  # 1LCD chain A
OTHER = "MKVLAGGSSWTLLEEAAKRG"
POOL = (REPO_DATA / "alignments" / "1lcd_A" / "jackhmmer_pool.a3m").read_text().split(">")[2:]  # hits only
UNIREF = f">101\n{SEQ}\n" + "".join(">" + r for r in POOL[:120])
ENV = f">101\n{SEQ}\n" + "".join(">" + r for r in POOL[120:]) + "\x00"  # ColabFold ends a query's block with NUL


def _result_tar(files: dict) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class StandIn:
    """The documented protocol: POST /ticket/msa (form q, mode), GET /ticket/<id>, GET /result/download/<id>;
    and the paired mode, POST /ticket/pair (form q with one record per sequence, mode).

    ``plans`` maps a sequence (paired mode: the tuple of the query's sequences) to the statuses the server
    gives: the submission's first, then one per poll; ``RATELIMIT`` answers to a submission are consumed one
    per submission. ``results`` maps a sequence (or tuple) to its result files. ``log`` records (method,
    path, form)."""

    def __init__(self, plans: dict, results: dict):
        self.plans = {k: list(v) for k, v in plans.items()}
        self.results = results
        self.log = []
        self.tickets = {}
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = 5

            def log_message(self, *args):
                pass

            def _json(self, obj):
                body = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
                outer.log.append(("POST", self.path, form))
                sequences = tuple(form["q"][0].split("\n")[1::2])
                sequence = sequences if self.path == "/ticket/pair" else sequences[0]
                plan = outer.plans[sequence]
                status = plan.pop(0)
                if status == "RATELIMIT":
                    self._json({"status": "RATELIMIT"})
                    return
                ticket = f"t{len(outer.tickets)}"
                outer.tickets[ticket] = sequence
                self._json({"id": ticket, "status": status})

            def do_GET(self):
                outer.log.append(("GET", self.path, None))
                kind, ticket = self.path.strip("/").rsplit("/", 1)
                sequence = outer.tickets[ticket]
                if kind == "ticket":
                    plan = outer.plans[sequence]
                    self._json({"id": ticket, "status": plan.pop(0) if plan else "COMPLETE"})
                elif kind == "result/download":
                    body = _result_tar(outer.results[sequence])
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self.send_error(404)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


RESULT = {"uniref.a3m": UNIREF, "bfd.mgnify30.metaeuk30.smag30.a3m": ENV, "pdb70.m8": "101\t1abc_A\t0.9\n"}


@pytest.fixture
def waits(monkeypatch):
    """The client's waits, recorded instead of slept."""
    seen = []
    monkeypatch.setattr(msa_server, "_sleep", seen.append)
    return seen


def _serve(plans, results=None):
    return StandIn(plans, results or {s: RESULT for s in plans})


def test_queued_ticket_gives_the_served_a3m_and_is_cached(tmp_path, waits):
    server = _serve({SEQ: ["PENDING", "RUNNING", "RUNNING", "COMPLETE"]})
    lines = []
    options = MsaServerOptions(server.url, poll_interval=1.0, max_interval=2.0)
    try:
        files = fetch_server_msa("1lcd_A", SEQ, tmp_path, options, log=lines.append)
        assert [f.split("/")[-1] for f in files] == list(MODES["env"])
        assert open(files[0]).read() == UNIREF and open(files[1]).read() == ENV.replace("\x00", "")
        assert server.log[0] == ("POST", "/ticket/msa", {"q": [f">101\n{SEQ}\n"], "mode": ["env"]})
        assert [p for m, p, _ in server.log[1:]] == ["/ticket/t0"] * 3 + ["/result/download/t0"]
        assert len(waits) == 3 and waits[0] >= 1.0 and all(w <= 2.0 * 1.2 for w in waits)  # growing, bounded
        assert waits[1] > waits[0] * 1.2 or waits[1] >= 1.5
        assert any("ticket t0 RUNNING" in line for line in lines) and "done" in lines[-1]
        record = json.loads((tmp_path / cache_key(SEQ, "env") / "request.json").read_text())
        assert record == {
            "sequence": SEQ,
            "mode": "env",
            "server": server.url,
            "ticket": "t0",
            "files": list(MODES["env"]),
        }
        n = len(server.log)
        again = fetch_server_msa("1lcd_A", SEQ.lower(), tmp_path, options, log=lines.append)  # cached by sequence
        assert again == files and len(server.log) == n and "reusing" in lines[-1]
        server.plans[SEQ] = ["COMPLETE"]
        fetch_server_msa("1lcd_A", SEQ, tmp_path, MsaServerOptions(server.url, "all"), log=lines.append)
        assert len(server.log) == n + 2  # another mode is another request (COMPLETE at once: no poll)
    finally:
        server.close()


def test_rate_limited_submission_is_sent_again(tmp_path, waits):
    server = _serve({SEQ: ["RATELIMIT", "RATELIMIT", "PENDING", "COMPLETE"]})
    lines = []
    try:
        files = fetch_server_msa("q", SEQ, tmp_path, MsaServerOptions(server.url, poll_interval=0.5), log=lines.append)
    finally:
        server.close()
    assert [m for m, _, _ in server.log] == ["POST", "POST", "POST", "GET", "GET"]
    limited = [line for line in lines if "RATELIMIT" in line]
    assert len(limited) == 2 and "submitting again in" in limited[0] and "(attempt 2 of 8)" in limited[0]
    assert open(files[0]).read() == UNIREF


def test_rate_limited_every_time_fails_in_one_line(tmp_path, waits):
    server = _serve({SEQ: ["RATELIMIT"] * 3})
    try:
        with pytest.raises(MsaServerError) as info:
            fetch_server_msa("q", SEQ, tmp_path, MsaServerOptions(server.url, submit_attempts=3), log=lambda s: None)
    finally:
        server.close()
    message = str(info.value)
    assert "\n" not in message and "rate-limited the submission 3 times" in message and "moderate use" in message
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("plan", [["PENDING", "ERROR"], ["ERROR"], ["MAINTENANCE"]])
def test_failed_ticket_is_one_line_and_nothing_cached(tmp_path, waits, plan):
    server = _serve({SEQ: plan})
    try:
        with pytest.raises(MsaServerError) as info:
            fetch_server_msa("q", SEQ, tmp_path, MsaServerOptions(server.url), log=lambda s: None)
    finally:
        server.close()
    assert "\n" not in str(info.value)
    assert re.search("answered ERROR|under maintenance", str(info.value))
    assert not list(tmp_path.iterdir())


def test_served_alignments_get_the_checks_of_a_local_a3m(tmp_path, waits):
    wrong = {**RESULT, "uniref.a3m": f">101\n{OTHER}\n"}
    server = _serve({SEQ: ["COMPLETE"]}, {SEQ: wrong})
    try:
        with pytest.raises(MsaServerError, match="returned uniref.a3m, which fails the A3M checks: .*query"):
            fetch_server_msa("q", SEQ, tmp_path, MsaServerOptions(server.url), log=lambda s: None)
        server.results[SEQ] = {"pdb70.m8": ""}
        server.plans[SEQ] = ["COMPLETE"]
        with pytest.raises(MsaServerError, match="the result has no uniref.a3m, bfd.mgnify30"):
            fetch_server_msa("q", SEQ, tmp_path, MsaServerOptions(server.url), log=lambda s: None)
    finally:
        server.close()
    assert not [p for p in tmp_path.iterdir() if not p.name.startswith(".")] and not list(tmp_path.glob(".*"))


def test_unreachable_server_and_bad_options(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(MsaServerError, match=f"cannot reach MSA server 127.0.0.1:{port}"):
        fetch_server_msa("q", SEQ, tmp_path, MsaServerOptions(f"http://127.0.0.1:{port}"), log=lambda s: None)
    with pytest.raises(ValueError, match="choose one of env, all"):
        MsaServerOptions("http://x", mode="uniref")
    with pytest.raises(ValueError, match="expected an http"):
        MsaServerOptions("api.colabfold.com")


# ------------------------------------------------------------------------------------------------
# predict --msa-server
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "tiny.ckpt"
    save_checkpoint(AlphaFold(model_config("tiny")), path)
    return path


def _predict(tmp_path, fasta, url, weights, *extra):
    out = tmp_path / "out"
    argv = ["predict", str(fasta), "--msa-server", url, "--weights", str(weights), "--out", str(out)]
    fixed = ["--num-recycles", "0", "--device", "cpu", "--memory-policy", "reference"]  # no planner trace
    return main(argv + fixed + list(extra)), out


def test_predict_uses_the_served_a3m(tmp_path, tiny_weights, waits, capsys):
    fasta = tmp_path / "one.fasta"
    fasta.write_text(f">1lcd_A\n{SEQ}\n")
    server = _serve({SEQ: ["PENDING", "RUNNING", "COMPLETE"]})
    try:
        code, out = _predict(tmp_path, fasta, server.url, tiny_weights, "--record-paths")
    finally:
        server.close()
    assert code == 0, capsys.readouterr().err
    scores = json.loads(prediction(out, "1lcd_A", "_scores.json").read_text())
    served = [parse_a3m_string(UNIREF, query=SEQ), parse_a3m_string(ENV.replace("\x00", ""), query=SEQ)]
    rows = list(dict.fromkeys([SEQ] + [r for m in served for r in m.sequences]))
    assert scores["msa_depth"] == len(rows) and scores["msa_mode"] == "msa"
    used = [parse_msa(f, query=SEQ) for f in scores["msa_files"]]
    assert [m.sequences for m in used] == [m.sequences for m in served]  # the MSA used is the served one
    assert [open(f).read() for f in scores["msa_files"]] == [UNIREF, ENV.replace("\x00", "")]


def test_a_failed_ticket_fails_its_target_and_the_batch_continues(tmp_path, tiny_weights, waits, capsys):
    fasta = tmp_path / "two.fasta"
    fasta.write_text(f">bad\n{OTHER}\n>1lcd_A\n{SEQ}\n")
    server = _serve({OTHER: ["PENDING", "ERROR"], SEQ: ["RATELIMIT", "COMPLETE"]})
    try:
        code, out = _predict(tmp_path, fasta, server.url, tiny_weights)
    finally:
        server.close()
    err = capsys.readouterr().err
    assert code == 1
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert (
        errors[0].startswith(f"error: {fasta}:1: record 'bad': MSA server: 127.0.0.1:")
        and "answered ERROR" in errors[0]
    )
    assert len(errors) == 1 or "rejected or failed" not in errors[1]
    assert "Traceback" not in err
    assert ranked(out, "1lcd_A").exists() and not ranked(out, "bad").exists()
    assert json.loads(prediction(out, "1lcd_A", "_scores.json").read_text())["msa_depth"] > 100


def test_msa_server_flag_conflicts_are_one_line(tmp_path, capsys):
    fasta = tmp_path / "one.fasta"
    fasta.write_text(f">q\n{SEQ}\n")
    for extra, said in ((["--db", str(fasta)], "--db"), (["--single-sequence"], "--single-sequence")):
        assert (
            main(["predict", str(fasta), "--out", str(tmp_path / "o"), "--msa-server", "http://127.0.0.1:9", *extra])
            == 2
        )
        assert f"error: --msa-server cannot be combined with {said}" in capsys.readouterr().err
    assert main(["predict", str(fasta), "--out", str(tmp_path / "o"), "--msa-server", "127.0.0.1:9"]) == 2
    assert "expected an http:// or https:// URL" in capsys.readouterr().err


def test_the_public_server_is_named_with_its_terms_before_any_request(tmp_path, monkeypatch):
    """No request leaves the machine: the client call is replaced by one that fails."""

    def offline(name, *args, **kwargs):
        raise MsaServerError(f"{name}: not sent")

    monkeypatch.setattr(stages, "fetch_server_msa", offline)
    lines = []
    given = Target("given", SEQ, "", "in.fasta:3", msa_files=("x.a3m",))
    asked = Target("asked", SEQ, "", "in.fasta:1")
    options = stages.PipelineOptions(msa_server=msa_server.PUBLIC_SERVER, log=lines.append)
    failed = options.search([asked, given], str(tmp_path))
    assert [(t.name, m) for t, m in failed] == [("asked", "in.fasta:1: record 'asked': MSA server: asked: not sent")]
    assert (
        lines[0].startswith(f"note: sending 1 sequence(s) to {msa_server.PUBLIC_SERVER}: ")
        and "moderate use" in lines[0]
    )
    assert "given: MSA given (x.a3m); not asking the MSA server" in lines[1]
