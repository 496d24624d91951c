from spex.services.coordinator.service import main

raise SystemExit(main())
