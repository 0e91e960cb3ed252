from kronos_core.cli import main

raise SystemExit(main())
