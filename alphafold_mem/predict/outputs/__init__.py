"""Prediction outputs: PDB (pLDDT in the B-factor column), ModelCIF, scores / PAE JSON, plots.

Every writer takes plain numpy arrays (atom37 layout, Å; pLDDT on 0-100) and writes one file
atomically (:func:`alphafold_mem.io.atomic_write`), so an interrupted run never leaves a half-written
output. :func:`write_target_outputs` writes all files of one target, all or none: they are first
written into a staging directory next to them (``.<name>.<host>-<pid>.<random>.tmp``) and renamed
into place only when every one is complete, so a failed write (no space, read-only) or a signal leaves
the target as it was (absent, or the previous result under ``--overwrite``); a signal is held while
the files are renamed (:func:`alphafold_mem.predict.signals.deferred`). A staging directory of the
target left by a process that was killed (SIGKILL, a crash of the machine's process) on this host is
removed the next time the target is written (:func:`remove_stale_stages`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile

from ...io import WriteError
from ...version import __version__
from .. import signals
from ..provenance import check_still_ours
from ..targets import Target
from .modelcif import write_modelcif
from .pdb import write_pdb
from .plots import plot_pae, plot_plddt
from .scores import pae_json, write_json


def output_paths(out_dir: str, name: str, with_pae: bool) -> dict[str, str]:
    """The output files of target ``name``: PDB, ModelCIF, pLDDT plot, scores JSON and, with a PAE
    head, PAE JSON and plot."""
    p = {"pdb": f"{name}.pdb", "cif": f"{name}.cif", "plddt_png": f"{name}_plddt.png", "scores": f"{name}_scores.json"}
    if with_pae:
        p.update({"pae_json": f"{name}_pae.json", "pae_png": f"{name}_pae.png"})
    return {k: os.path.join(out_dir, v) for k, v in p.items()}


def write_target_outputs(paths: dict[str, str], t: Target, out: dict, scores: dict, method: str) -> None:
    """Write every output file of one target (paths from :func:`output_paths`), all or none (module
    docstring): the files are staged, then renamed into place with the scores JSON last, so its presence
    marks the target as finished. A previous result's scores JSON is removed before the renames, and its
    files that this result does not have (a PAE of another model) after them.

    Raises:
        alphafold_mem.io.WriteError: a file could not be written (named by its final path); the
            target's files are as they were.
        alphafold_mem.predict.targets.PredictError: another run wrote this target with other inputs or
            options since this run started (:func:`~alphafold_mem.predict.provenance.check_still_ours`).
    """
    check_still_ours(t, paths["scores"])
    final = paths["scores"]
    name = os.path.basename(final)[: -len("_scores.json")]
    directory = os.path.dirname(os.path.abspath(final))
    with signals.deferred():
        try:
            os.makedirs(directory, exist_ok=True)
            remove_stale_stages(directory, name)
            stage = tempfile.mkdtemp(prefix=f".{name}.{_owner()}.", suffix=".tmp", dir=directory)
        except OSError as exc:
            raise WriteError(exc.errno, exc.strerror, paths["pdb"]) from exc
        try:
            staged = {k: os.path.join(stage, os.path.basename(p)) for k, p in paths.items()}
            try:
                _write_all(staged, t, out, scores, method)
            except WriteError as exc:  # named by the staged path: name the final one
                where = next((paths[k] for k, p in staged.items() if p == exc.filename), exc.filename)
                raise WriteError(exc.errno, exc.strerror, where) from exc
            _swap_in(staged, paths)
            stale = set(output_paths(directory, name, with_pae=True).values()) - {
                os.path.abspath(p) for p in paths.values()
            }
            for path in stale:  # a previous result's file this one does not have
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def _host() -> str:
    """This host's name as staging directories write it (dots and dashes kept out, so it parses back)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())


def _owner() -> str:
    """``<host>-<pid>`` of this process, as staging directories name it."""
    return f"{_host()}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_stages(directory: str, name: str) -> list[str]:
    """Remove the staging directories of target ``name`` in ``directory`` that a process of this host
    left when it died (its pid no longer runs); returns their paths. Directories of live processes and
    of other hosts (a shared file system) are kept."""
    host = _host()
    pattern = re.compile(re.escape(f".{name}.") + r"(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)\.[^/]*\.tmp")
    removed = []
    try:
        entries = os.listdir(directory)
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry)
        if m and m["host"] == host and not _alive(int(m["pid"])):
            path = os.path.join(directory, entry)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _swap_in(staged: dict[str, str], paths: dict[str, str]) -> None:
    """Rename the staged files into place, the scores JSON last (the previous one removed first, so no
    moment shows a previous scores JSON beside new files); on a failed rename the target's files are
    removed (absent rather than mixed)."""
    key = "scores"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.remove(paths["scores"])
        for key in [k for k in staged if k != "scores"] + ["scores"]:
            os.replace(staged[key], paths[key])
    except OSError as exc:
        for path in paths.values():
            with contextlib.suppress(OSError):
                os.remove(path)
        raise WriteError(exc.errno, exc.strerror, paths[key]) from exc


def _write_all(paths: dict[str, str], t: Target, out: dict, scores: dict, method: str) -> None:
    aatype, mask = out["aatype"], out["final_atom_mask"]
    pos, plddt = out["final_atom_positions"], out["plddt"]
    remarks = [f"target {t.name}: {t.description[:200]}", method]
    write_pdb(paths["pdb"], t.name, aatype, pos, mask, plddt, remarks=remarks)
    write_modelcif(
        paths["cif"],
        t.name,
        aatype,
        pos,
        mask,
        plddt,
        ptm=out.get("ptm"),
        description=t.description,
        software_version=__version__,
        method_details=method,
    )
    plot_plddt(paths["plddt_png"], plddt, title=t.name)
    if "pae_json" in paths:
        pae, max_pae = out["predicted_aligned_error"], out["max_predicted_aligned_error"]
        write_json(paths["pae_json"], pae_json(pae, max_pae), indent=None)
        plot_pae(paths["pae_png"], pae, max_pae, title=t.name)
    write_json(paths["scores"], scores, flat=True)  # last: its presence marks the target as finished


__all__ = [
    "output_paths",
    "remove_stale_stages",
    "pae_json",
    "plot_pae",
    "plot_plddt",
    "write_json",
    "write_modelcif",
    "write_pdb",
    "write_target_outputs",
]
