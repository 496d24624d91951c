from spex.services.ingress.service import main

raise SystemExit(main())
