# SPDX-License-Identifier: Apache-2.0
"""What ``--overwrite`` may delete, for every tool that writes a checkpoint
directory: the checkpoint makers (``spark2_5-make-tiny-checkpoint``,
``make_checkpoint`` and its in-tree copies) and ``spark2_5-train-dspark``.

It replaces an earlier checkpoint (a directory that holds a config.json) and
nothing else: a directory of other files is refused, and so is the working
directory or one of its parents, whatever it holds. It used to delete any
directory, and ``PATH=.`` deleted the working directory's files and then
failed to write anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_spark2_5_plugin.tools import make_checkpoint, tiny_checkpoint, train_dspark
from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

# The trainer's smallest run (it never starts: see _trainer_stops).
SMALL = ("--num-prompts", "2", "--eval-prompts", "1", "--prompt-len", "8")
SMALL += ("--gen-len", "8", "--steps", "2", "--device", "cpu")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny checkpoint with a draft: the trainer's input and the in-tree
    copies' source."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), dspark=True)


class Started(Exception):
    """The trainer got past its checks (and past deleting the output)."""


def _trainer_stops(*args, **kwargs):
    raise Started


def _tree(path: Path) -> dict[str, str]:
    """Every file under ``path`` and its text (to see that none changed)."""
    return {
        str(p.relative_to(path)): p.read_text() for p in path.rglob("*") if p.is_file()
    }


def _own_files(path: Path) -> dict[str, str]:
    """A directory of someone's work (no checkpoint)."""
    (path / "sub").mkdir(parents=True)
    (path / "notes.txt").write_text("important")
    (path / "sub" / "code.py").write_text("x = 1")
    return _tree(path)


def _run(
    tool: str, path: str, tiny: Path, capsys, monkeypatch, overwrite: bool = True
) -> str:
    """Run ``tool`` writing to ``path`` with ``--overwrite``; return its error
    (the ``SystemExit`` text or what argparse printed)."""
    flag = ["--overwrite"] if overwrite else []
    if tool == "trainer":
        monkeypatch.setattr(train_dspark, "target_and_sequences", _trainer_stops)
        call = lambda: train_dspark.train([str(tiny), path, *flag, *SMALL])  # noqa: E731
    elif tool == "tiny":
        call = lambda: tiny_checkpoint.main([path, *flag])  # noqa: E731
    elif tool == "mini":
        argv = [path, "--preset", "mini", "--dtype", "float32", *flag]
        call = lambda: make_checkpoint.main(argv)  # noqa: E731
    else:  # the in-tree copy's directory is PATH-llama beside the checkpoint
        assert path.endswith("-llama")
        argv = [path.removesuffix("-llama"), "--in-tree-only", "--in-tree", "llama"]
        call = lambda: make_checkpoint.main([*argv, *flag])  # noqa: E731
    with pytest.raises(SystemExit) as stopped:
        call()
    assert stopped.value.code not in (0, None)
    code = stopped.value.code if isinstance(stopped.value.code, str) else ""
    return code + capsys.readouterr().err


TOOLS = ["tiny", "mini", "in-tree", "trainer"]


def _target(tmp_path: Path, tiny: Path, tool: str, name: str) -> Path:
    """Where ``tool`` writes, for a directory ``name`` of ``tmp_path``."""
    if tool != "in-tree":
        return tmp_path / name
    import shutil

    shutil.copytree(tiny, tmp_path / name)  # the in-tree copy's source
    return tmp_path / f"{name}-llama"


@pytest.mark.parametrize("tool", TOOLS)
def test_overwrite_refuses_a_directory_that_is_not_a_checkpoint(
    tmp_path, tiny, capsys, monkeypatch, tool
):
    out = _target(tmp_path, tiny, tool, "mywork")
    before = _own_files(out)
    said = _run(tool, str(out), tiny, capsys, monkeypatch)
    assert (
        f"{out} holds notes.txt, sub but no config.json, so it is not a checkpoint; "
        "--overwrite only replaces a checkpoint directory: pick an empty or new "
        "directory"
    ) in said, said
    assert _tree(out) == before


def test_a_refused_directory_names_a_few_of_its_entries(tmp_path, capsys):
    out = tmp_path / "many"
    out.mkdir()
    for i in range(9):
        (out / f"file{i}.txt").write_text("mine")
    said = _run("tiny", str(out), Path(), capsys, None)
    assert "holds file0.txt, file1.txt, file2.txt, file3.txt, file4.txt, ... " in said
    assert "(9 entries) but no config.json" in said
    assert len(list(out.iterdir())) == 9


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("where", [".", ".."])
def test_overwrite_never_empties_the_working_directory_or_a_parent(
    tmp_path, tiny, capsys, monkeypatch, tool, where
):
    """Even one that holds a config.json: ``.`` used to lose every file (and
    get no checkpoint either)."""
    out = _target(tmp_path, tiny, tool, "work")
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / "keep.txt").write_text("mine")
    cwd = out if where == "." else out / "inner"
    cwd.mkdir(exist_ok=True)
    before = _tree(out)
    monkeypatch.chdir(cwd)
    path = where
    if tool == "in-tree":  # PATH-llama is never "." itself: the same, relative
        path = str(Path(*[".."] * (1 if where == "." else 2), out.name))
    said = _run(tool, path, tiny, capsys, monkeypatch)
    assert "is the working directory" in said and "or one of its parents" in said
    assert "--overwrite never empties it: pick an empty or new directory" in said
    assert _tree(out) == before


@pytest.mark.parametrize("tool", ["tiny", "trainer"])
def test_overwrite_replaces_an_earlier_checkpoint_through_a_link(
    tmp_path, tiny, capsys, monkeypatch, tool
):
    """The checkpoint's entries are deleted, not the directory: a link to it
    stays a link (``rmtree`` refused to delete one, after the checks), and
    a link inside it goes without what it points at."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "config.json").write_text("{}")
    (real / "model-00001-of-00002.safetensors").write_text("stale shard")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "data.txt").write_text("not the checkpoint's")
    (real / "linked").symlink_to(elsewhere, target_is_directory=True)
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    if tool == "tiny":
        tiny_checkpoint.main([str(link), "--overwrite"])
        assert (
            json.loads((real / "config.json").read_text())["model_type"] == "spark2_5"
        )
    else:
        monkeypatch.setattr(train_dspark, "target_and_sequences", _trainer_stops)
        with pytest.raises(Started):
            train_dspark.train([str(tiny), str(link), "--overwrite", *SMALL])
        assert list(real.iterdir()) == []  # emptied, then the run started
    assert link.is_symlink() and real.is_dir()
    assert not (real / "model-00001-of-00002.safetensors").exists()
    assert not (real / "linked").exists()
    assert (elsewhere / "data.txt").read_text() == "not the checkpoint's"


def test_the_library_refuses_as_the_command_does(tmp_path):
    """``make_checkpoint(..., overwrite=True)`` and ``write_in_tree``'s
    ``overwrite`` go through the same rule (``FileExistsError``)."""
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import prepare_dir

    out = tmp_path / "mywork"
    before = _own_files(out)
    with pytest.raises(
        FileExistsError, match="holds notes.txt, sub but no config.json"
    ):
        prepare_dir(out, overwrite=True)
    assert _tree(out) == before


# -- a run that stops midway leaves nothing that looks like a checkpoint ---------

WRITERS = ["tiny", "mini", "in-tree"]


def _write(tool: str, out: Path, tiny: Path, *flags: str) -> None:
    """Run the maker ``tool`` writing the checkpoint directory ``out`` (for
    ``in-tree``, ``out`` is ``SRC-llama`` beside a copy of ``tiny``)."""
    if tool == "tiny":
        tiny_checkpoint.main([str(out), *flags])
    elif tool == "mini":
        make_checkpoint.main(
            [str(out), "--preset", "mini", "--dtype", "float32", *flags]
        )
    else:
        src = str(out).removesuffix("-llama")
        make_checkpoint.main([src, "--in-tree-only", "--in-tree", "llama", *flags])


def _destination(tmp_path: Path, tiny: Path, tool: str) -> Path:
    """Where ``tool`` writes in ``tmp_path`` (``ckpt``; for the in-tree copy
    ``ckpt-llama``, beside a copy of ``tiny``)."""
    if tool != "in-tree":
        return tmp_path / "ckpt"
    import shutil

    shutil.copytree(tiny, tmp_path / "ckpt")
    return tmp_path / "ckpt-llama"


@pytest.mark.parametrize("tool", WRITERS)
def test_config_json_is_written_last(tmp_path, tiny, monkeypatch, tool):
    """config.json marks a directory as a checkpoint (``--overwrite`` and the
    other tools go by it), so it comes after every other file: a run killed
    midway (SIGTERM, out of memory) leaves none. It used to come first."""
    from transformers import PreTrainedConfig

    out = _destination(tmp_path, tiny, tool)
    save = PreTrainedConfig.save_pretrained
    seen: list[set[str]] = []

    def recording(self, directory, *args, **kwargs):
        seen.append({p.name for p in Path(directory).iterdir()})
        return save(self, directory, *args, **kwargs)

    monkeypatch.setattr(PreTrainedConfig, "save_pretrained", recording)
    _write(tool, out, tiny)
    final = {p.name for p in out.iterdir()}
    assert "config.json" in final and "model.safetensors" in final
    assert seen == [final - {"config.json"}]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError], ids=["ctrl-c", "error"])
@pytest.mark.parametrize("tool", WRITERS)
def test_a_failed_write_leaves_no_half_written_checkpoint(
    tmp_path, tiny, monkeypatch, capsys, tool, stop
):
    """Stopped while writing the weights, a maker deletes what it wrote: a
    new directory goes, an emptied one (``--overwrite``) is left empty. It
    used to leave a config.json alone, which every tool took for a
    checkpoint."""
    import safetensors.torch

    def failing(tensors, filename, *args, **kwargs):
        Path(filename).write_bytes(b"half")
        raise stop("stopped")

    monkeypatch.setattr(safetensors.torch, "save_file", failing)
    out = _destination(tmp_path, tiny, tool)
    with pytest.raises((stop, SystemExit)):
        _write(tool, out, tiny)
    assert not out.exists()
    # An earlier checkpoint that --overwrite replaces: emptied, nothing written.
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_text("old")
    with pytest.raises((stop, SystemExit)):
        _write(tool, out, tiny, "--overwrite")
    assert out.is_dir() and list(out.iterdir()) == []
