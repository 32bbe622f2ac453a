from sglang_gemma4.cli import main

raise SystemExit(main())
