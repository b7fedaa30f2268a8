"""python -m validation.published.throughput: the step-time model against published multi-GPU throughput."""
from validation.published.throughput import main

raise SystemExit(main())
