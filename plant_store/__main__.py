from plant_store.cli import main

raise SystemExit(main())
