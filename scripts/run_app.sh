#!/usr/bin/env bash
# Install what the app needs into .venv and start the dashboard on http://localhost:8501 (works offline on the
# shipped presets; a Hugging Face id needs network, or a cached copy).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q -r requirements.txt
# the C replay of the caching allocator (calculator/allocator/native): a model's first estimate in well under a millisecond;
# without a C compiler it says so and the pure Python replay runs, with the same figures
.venv/bin/python -m calculator.allocator.native >/dev/null || true
exec .venv/bin/python -m streamlit run app.py --server.port "${PORT:-8501}" "$@"
