"""`python -m validation.published.megatron_ci`: every row and each group's median and worst error."""
from validation.published.megatron_ci import main

raise SystemExit(main())
