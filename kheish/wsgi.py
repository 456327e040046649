"""The WSGI application gunicorn serves (``kheish.wsgi:application``).

Once the application is loaded, every object it made so far - Django, DRF, the models, numpy, the
embedding model's tables: ~140,000 container objects - is moved out of the garbage collector's reach
(``gc.freeze``): they live as long as the worker. A full collection scanned them all, ~65 ms during which
the worker's threads answered nothing, every few hundred requests; after the freeze it scans only what was
made since. Reference counting frees as before; only cycles among the frozen objects are never collected
(there are none worth the pause: they were made once, at start)."""

import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kheish.settings")
application = get_wsgi_application()

gc.collect()  # what loading left as garbage goes now, not into the frozen generation
gc.freeze()
