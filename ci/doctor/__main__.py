"""``python -m ci.doctor INDEX``: the doctor without the farm's tools (standard library plus ``packaging``)."""

import sys

from ci.doctor.diagnose import main

sys.exit(main())
