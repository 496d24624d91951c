from spex.services.generator.service import main

raise SystemExit(main())
