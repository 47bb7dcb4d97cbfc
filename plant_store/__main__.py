from plant_store.cli.main import main

raise SystemExit(main())
