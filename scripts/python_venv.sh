#!/usr/bin/env bash
# The Python package as users get it, on the two torches the tests run against (CTest's Python.*
# and PythonOldest.*, from scripts/python_tests.sh):
#   build/venv-torch-newest  the newest torch on the project's machines: pip's torch 2.14.1 with
#                            torchvision 0.29.1 (SCALEINV_TORCH_NEWEST / SCALEINV_TORCHVISION_NEWEST),
#                            and Hugging Face transformers 5.24.0 (SCALEINV_TRANSFORMERS_NEWEST; for
#                            tests/python/test_hf_models.py, which skips where it is missing), timm
#                            1.0.31 (SCALEINV_TIMM_NEWEST; for tests/python/test_vision_models.py and
#                            examples/python/vision_models.py, whose timm rows skip where it is missing;
#                            installed --no-deps: its dependencies, torch, torchvision, huggingface_hub,
#                            safetensors and pyyaml, are already here, and pip must not move torch), and Ray
#                            2.60.0 (SCALEINV_RAY_NEWEST; scaleinv.sweep(executor="ray") and
#                            tests/python/test_ray_executor.py, which skips where it is missing: 79 MB
#                            wheel, 240 MB installed, about 7 s), and cloudpickle 3.1.2
#                            (SCALEINV_CLOUDPICKLE_NEWEST; scaleinv.sweep(executor="slurm") and
#                            tests/python/test_slurm_executor.py, which skips where it is missing), and
#                            torchtitan 0.3.0 (SCALEINV_TORCHTITAN_NEWEST; tests/python/
#                            test_torchtitan_models.py, which skips where it is missing) with --no-deps
#                            and only what its model files import (torch_checkpointing, spmd_types,
#                            tyro and its two): its full requirements (datasets, wandb, tensorboard,
#                            ...) would move huggingface_hub back to 1.x under transformers; 3 MB, 4 s;
#                            in a venv of PYTHON (default the first python3 on PATH); `pip install .` with
#                            build isolation (setuptools and pybind11 from PyPI)
#   build/venv-torch-oldest  the oldest torch the package claims: Debian's python3-torch (1.13 on
#                            Debian 12; 2.6 on Debian 13, whose archive has no older one) through
#                            /usr/bin/python3 -m venv --system-site-packages; `pip install .` offline
#                            (--no-build-isolation --no-index: Debian's setuptools, wheel, pybind11-dev);
#                            no Ray (Debian has none; its tests skip saying so), nor cloudpickle
#                            (Debian's python3-cloudpickle, where installed, is used: --system-site-packages)
# The package both venvs install is the wheel README's own install lines build (scripts/readme_install.py:
# a fresh copy of the tracked files, a fresh venv, `pip install .` with build isolation, offline, then
# `pip wheel`; build/readme-install/dist): the tests test what README tells a user to build, and the
# torch-free brain is compiled once, not once per venv. --force-reinstall --no-deps of that wheel. Where
# the oldest venv's Python is another minor version than the one on PATH (Debian 13's 3.13 beside a
# 3.11), the wheel does not fit it: there it is `pip install .` offline, as above.
#   bash scripts/python_venv.sh [newest|oldest|both]      (default both)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
which="${1:-both}"
pipq=(-q --disable-pip-version-check)

newest() {
  local venv=build/venv-torch-newest torch="${SCALEINV_TORCH_NEWEST:-2.14.1}" tv="${SCALEINV_TORCHVISION_NEWEST:-0.29.1}"
  local py="${PYTHON:-$(command -v python3)}"
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  local have
  have=$("$venv/bin/python" -c 'import torch, torchvision; print(torch.__version__.split("+")[0], torchvision.__version__.split("+")[0])' 2>/dev/null || true)
  if [ "$have" != "$torch $tv" ]; then
    echo "[python_venv] pip install torch==$torch torchvision==$tv into $venv"
    "$venv/bin/python" -m pip install "${pipq[@]}" "torch==$torch" "torchvision==$tv" numpy
  fi
  local hf="${SCALEINV_TRANSFORMERS_NEWEST:-5.24.0}"
  have=$("$venv/bin/python" -c 'import transformers; print(transformers.__version__)' 2>/dev/null || true)
  if [ "$have" != "$hf" ]; then
    echo "[python_venv] pip install transformers==$hf into $venv"
    "$venv/bin/python" -m pip install "${pipq[@]}" "torch==$torch" "transformers==$hf"
  fi
  local timm="${SCALEINV_TIMM_NEWEST:-1.0.31}"
  have=$("$venv/bin/python" -c 'import timm; print(timm.__version__)' 2>/dev/null || true)
  if [ "$have" != "$timm" ]; then
    echo "[python_venv] pip install timm==$timm into $venv"
    "$venv/bin/python" -m pip install "${pipq[@]}" "torch==$torch" "torchvision==$tv" pyyaml huggingface_hub safetensors
    "$venv/bin/python" -m pip install "${pipq[@]}" --no-deps "timm==$timm"
  fi
  local ray="${SCALEINV_RAY_NEWEST:-2.60.0}"
  have=$("$venv/bin/python" -c 'import ray; print(ray.__version__)' 2>/dev/null || true)
  if [ "$have" != "$ray" ]; then
    echo "[python_venv] pip install ray==$ray into $venv"
    "$venv/bin/python" -m pip install "${pipq[@]}" "torch==$torch" "ray==$ray"
  fi
  local cp="${SCALEINV_CLOUDPICKLE_NEWEST:-3.1.2}"
  have=$("$venv/bin/python" -c 'import cloudpickle; print(cloudpickle.__version__)' 2>/dev/null || true)
  if [ "$have" != "$cp" ]; then
    echo "[python_venv] pip install cloudpickle==$cp into $venv"
    "$venv/bin/python" -m pip install "${pipq[@]}" "cloudpickle==$cp"
  fi
  local tt="${SCALEINV_TORCHTITAN_NEWEST:-0.3.0}"
  have=$("$venv/bin/python" -c 'import importlib.metadata as m, torchtitan.models.llama3; print(m.version("torchtitan"))' 2>/dev/null || true)
  if [ "$have" != "$tt" ]; then
    echo "[python_venv] pip install --no-deps torchtitan==$tt into $venv"
    "$venv/bin/python" -m pip install "${pipq[@]}" --no-deps "torchtitan==$tt" "torch_checkpointing==0.1.1" \
      "spmd_types==0.2.3" "tyro==1.0.17" "docstring_parser==0.18.0" "typeguard==4.6.1"
  fi
  wait_wheel
  "$venv/bin/python" -m pip install "${pipq[@]}" --no-deps --force-reinstall "$wheel_path"
}

oldest() {
  local venv=build/venv-torch-oldest
  if [ ! -x /usr/bin/python3 ] || ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "[python_venv] error: /usr/bin/python3 has no torch (fix: run scripts/setup.sh, which installs python3-torch)" >&2
    exit 2
  fi
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  wait_wheel
  local whl="$wheel_path" tag
  tag=$("$venv/bin/python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
  if [[ "$(basename "$whl")" == *"-$tag-$tag-"* ]]; then
    "$venv/bin/python" -m pip install "${pipq[@]}" --no-deps --no-index --force-reinstall "$whl"
  else
    echo "[python_venv] $venv's Python ($tag) does not take $(basename "$whl"): pip install . offline"
    "$venv/bin/python" -m pip install "${pipq[@]}" --no-build-isolation --no-deps --no-index --force-reinstall .
  fi
}

case "$which" in
  newest|oldest|both) ;;
  *) echo "python_venv.sh: unknown leg '$which' (fix: newest, oldest or both)" >&2; exit 2 ;;
esac
# The wheel README's install lines build, once per run of this script (its progress on stderr, the
# wheel's path on stdout), made while the newest venv's torch and peers install beside it: their
# downloads wait on the network, the wheel's build on the CPU.
echo "[python_venv] README's install lines in a fresh copy (scripts/readme_install.py)"
wheel_out="$(mktemp)"
python3 "$here/scripts/readme_install.py" "$here" > "$wheel_out" &
readme_pid=$!
trap 'kill "$readme_pid" 2>/dev/null || true; rm -f "$wheel_out"' EXIT
wheel_path=""
wait_wheel() {
  if [ -z "$wheel_path" ]; then
    wait "$readme_pid" || { echo "[python_venv] error: README's install lines failed (above)" >&2; exit 1; }
    wheel_path="$(tail -n1 "$wheel_out")"
  fi
}

case "$which" in
  newest) newest ;;
  oldest) oldest ;;
  both) newest; oldest ;;
esac
