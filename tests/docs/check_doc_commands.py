#!/usr/bin/env python3
"""The commands that README.md and docs/*.md quote must run as written
(issue 38: zs-estimate examples without a layout had gone stale).

Every command of the docs is found: each line (continued with a backslash)
of a fenced block marked sh, bash, shell or console, the `$ `-prompted
lines of an unmarked block, and inline code spans that start with one of
the project's programs. Each must match a rule below:

  RUN   the cheap ones (estimates, tool invocations, a short training run):
        run in a scratch directory that holds the source tree's configs,
        scripts, tools, bench and tests and the build directory as `build`,
        with build/tools and tools on PATH (the names an install gives);
        each must exit 0. Open MPI gets --oversubscribe and --bind-to none
        through its environment (OMPI_MCA_*), so the text stays as written.
  SKIP  the others, each with the reason it cannot run in a test (minutes
        long, a GPU, real hosts, a download, a Slurm allocation) and,
        where there is one, the test that covers it instead.

A command that matches no rule fails the test with its file and line: a
new command in the docs must be made cheap enough to run here, or skipped
with a reason. Usage: check_doc_commands.py SOURCE_DIR BUILD_DIR [--list]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

FENCED = {"sh", "bash", "shell", "console"}
# Inline spans worth running start with one of these.
PROGRAMS = ("zs-estimate ", "zs-ckpt ", "zs-run ", "build/tools/", "build/examples/", "mpirun ")

# A placeholder the docs use for "any overrides": dropped before running.
PLACEHOLDER = re.compile(r"\s*\[group\.key=value \.\.\.\]")

# (pattern, setup or None) for commands to run. The setup runs first, once
# per distinct setup, in the same scratch directory.
MLP_CKPT = ("mpirun -np 2 build/examples/mlp/mlp_train configs/mlp_zero3.cfg "
            "checkpoint.dir=ckpt checkpoint.every=300 app.log_every=100")
RUN = [
    (r"^(build/tools/)?zs-estimate ", None),
    (r"^zs-run --help$", None),
    (r"^(build/tools/)?zs-ckpt --help$", None),
    (r"^build/tools/zs-ckpt (info|verify|export --dtype \w+) ckpt", MLP_CKPT),
    (r"^mpirun -np \d+ build/examples/mlp/mlp_train configs/mlp_zero\d\.cfg( '?[\w.]+=\S+)*$", None),
    (r"^python3 bench/estimate/llama_memory\.py build/tools/zs-estimate", None),
    (r"^scripts/netns-hosts\.sh check", None),
    (r"^sh tests/estimate/run_6p7b_plan\.sh ", None),
]

SKIP = [
    (r"^make (demo|test|demo-llama)\b", "minutes long; `make test` is CI itself, the demos are run by hand"),
    (r"^cmake |^\(?cd build && cpack", "builds and installs: tests/install covers them"),
    (r"^cc app\.c ", "an installed zeroshard: tests/install builds a consumer this way"),
    (r"build/examples/(gpt2|llama)/\w+_train", "minutes of training (or a downloaded model): "
     "tests/gpt2 and tests/llama run the trainers on tiny models"),
    (r"zs-ckpt export --hf", "a downloaded tokenizer: tests/checkpoint/run_hf_export.sh"),
    (r"zs-ckpt export --peft", "a LoRA run's checkpoint: tests/llama/run_llama_lora.sh"),
    (r"--hostfile|salloc|srun |\$SLURM|\$SCRATCH|scontrol", "real hosts or a Slurm allocation: "
     "tests/multihost and tests/slurm"),
    (r"^zs-run --hosts|^zs-run --mpirun-args|\"\$ZS_RUN\"|^docker ", "real hosts: tests/launcher"),
    (r"configs/mlp_zero3_cuda\.cfg|--backend cuda|bench_gpt2_cuda", "a GPU"),
    (r"^(bash |python3 )?bench/|^(mpirun .*)?build/bench/|^OMP_NUM_THREADS=\d+ build/bench/",
     "a benchmark: minutes, run by hand (docs/BENCHMARKS.md)"),
    (r"scripts/netns-hosts\.sh (up|down|exec|run)|^state=|^\$state/|^cat \$state",
     "root network namespaces kept across commands: tests/multihost"),
    (r"valgrind|^grep -A12", "minutes under valgrind, by hand"),
    (r"^pip install|^hf download|scripts/tokenize_text\.py|~/models|\$HOME/models",
     "a download from the Hugging Face hub"),
    (r"^cat > hosts|^node\d slots|^END$", "a hostfile for real hosts"),
    (r"^: \"\$\{|^export OMP_NUM_THREADS=\$\{|^pid=\$!|^trap |^wait |^while kill|^rc=\$\?|"
     r"^\[ \"\$rc\"|^exit \"\$rc\"", "the batch script of docs/UNATTENDED.md: tests/slurm runs it"),
    (r"^zs-run .*\.\.\.", "an option shown alone (the rest elided)"),
    (r"-H host:1", "a probe of a real host"),
]


def inline_commands(paragraph, first_line):
    """(line, command, True) for the code spans of a paragraph (lines of
    prose) that start with a program; a span may wrap across lines."""
    text = "\n".join(paragraph)
    out = []
    for m in re.finditer(r"`([^`]+)`", text):
        span = " ".join(m.group(1).split())
        if span.startswith(PROGRAMS):
            out.append((first_line + text.count("\n", 0, m.start()), span, True))
    return out


def commands(path):
    """(line, command, inline) for every command of a Markdown file."""
    out = []
    lines = open(path, encoding="utf-8").read().split("\n")
    fence = None
    pending = None
    paragraph, paragraph_at = [], 0
    for number, line in enumerate(lines, 1):
        m = re.match(r"^\s*```(\S*)", line)
        if fence is None and (m or not line.strip()):
            out += inline_commands(paragraph, paragraph_at)
            paragraph = []
        if m:
            fence = None if fence is not None else m.group(1)
            pending = None
            continue
        if fence is None:
            if line.strip():
                if not paragraph:
                    paragraph_at = number
                paragraph.append(line)
            continue
        if fence not in FENCED and fence != "":
            continue
        text = line.strip()
        if pending is not None:
            start, so_far = pending
            so_far += " " + text.rstrip("\\").strip()
            if text.endswith("\\"):
                pending = (start, so_far)
            else:
                out.append((start, so_far, False))
                pending = None
            continue
        if fence == "" and not text.startswith("$ "):
            continue
        if text.startswith("$ "):
            text = text[2:]
        if not text or text.startswith("#"):
            continue
        if text.endswith("\\"):
            pending = (number, text.rstrip("\\").strip())
            continue
        out.append((number, text, False))
    out += inline_commands(paragraph, paragraph_at)
    return out


def strip_comment(command):
    """The command without a trailing `# comment` (not inside quotes)."""
    quote = None
    for i, c in enumerate(command):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and i > 0 and command[i - 1] == " ":
            return command[:i].rstrip()
    return command


# Checked before RUN: templates and lists are text, not commands; and
# commands of RUN's programs that need a file only the user has.
FIRST_SKIP = [
    (r"(^| )(N|SIZE|SHAPE|FILE|DIR|PATH|HOST|PROGRAM|ARGS)( |$)|=(N|SIZE|PATH)\b",
     "a template: its capitals stand for values"),
    (r" / ", "a list of subcommands named in the text"),
    (r"^mpirun noticed ", "mpirun's output, quoted"),
    (r"--llmc model\.bin", "llm.c's model file: tests/estimate/run_6p7b_plan.sh writes one and "
     "runs this"),
]


def classify(command):
    command = " ".join(command.split())
    for pattern, reason in FIRST_SKIP:
        if re.search(pattern, command):
            return "skip", reason
    for pattern, setup in RUN:
        if re.search(pattern, command):
            return "run", setup
    for pattern, reason in SKIP:
        if re.search(pattern, command):
            return "skip", reason
    return None, None


def scratch(src, build):
    d = tempfile.mkdtemp(prefix="zs_doc_commands.")
    for name in ("configs", "scripts", "tools", "bench", "tests", "data"):
        if os.path.exists(os.path.join(src, name)):
            os.symlink(os.path.join(src, name), os.path.join(d, name))
    os.symlink(build, os.path.join(d, "build"))
    return d


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    src, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    listing = "--list" in sys.argv[3:]
    files = [os.path.join(src, "README.md")] + sorted(
        os.path.join(src, "docs", n) for n in os.listdir(os.path.join(src, "docs"))
        if n.endswith(".md"))
    failures, to_run, skipped = [], [], 0
    for path in files:
        rel = os.path.relpath(path, src)
        for line, raw, inline in commands(path):
            command = PLACEHOLDER.sub("", strip_comment(raw))
            if inline and len(command.split()) <= 2:
                continue  # a program or subcommand named in the text, not a command
            kind, what = classify(command)
            where = f"{rel}:{line}"
            if kind is None:
                failures.append(f"{where}: `{command}` matches no rule of "
                                f"tests/docs/check_doc_commands.py: make it runnable here "
                                f"(and add a RUN rule) or add a SKIP rule with the reason")
            elif kind == "skip":
                skipped += 1
                if listing:
                    print(f"skip {where}: {command}  ({what})")
            else:
                if "..." in command:
                    failures.append(f"{where}: `{command}` elides part of the command "
                                    f"(`...`): quote it whole, so it runs as written")
                    continue
                to_run.append((where, command, what))
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.join(build, "tools"), os.path.join(src, "tools"),
                                   env.get("PATH", "")])
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_hwloc_base_binding_policy="none",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    work = scratch(src, build)
    done_setups = set()
    try:
        for where, command, setup in to_run:
            if setup and setup not in done_setups:
                r = subprocess.run(setup, shell=True, cwd=work, env=env, capture_output=True,
                                   text=True, timeout=300)
                done_setups.add(setup)
                if r.returncode != 0:
                    failures.append(f"{where}: its setup `{setup}` exited {r.returncode}:\n"
                                    f"{r.stdout[-2000:]}{r.stderr[-2000:]}")
                    continue
            r = subprocess.run(command, shell=True, cwd=work, env=env, capture_output=True,
                               text=True, timeout=300)
            # netns-hosts.sh check answers 77 where namespaces cannot be made.
            ok = r.returncode == 0 or (r.returncode == 77 and "netns-hosts.sh check" in command)
            print(f"{'ok  ' if ok else 'FAIL'} {where}: {command} (exit {r.returncode})")
            if not ok:
                failures.append(f"{where}: `{command}` exited {r.returncode}:\n"
                                f"{r.stdout[-3000:]}{r.stderr[-3000:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(to_run)} commands run, {skipped} skipped with a reason, "
          f"{len(failures)} failures")
    for f in failures:
        print(f"FAIL {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
