"""palm-search: the search over parallel mappings of large-model training (``palm-search`` CLI).

Importing the package sets the youngest-generation threshold of Python's cyclic garbage
collector to :data:`GC_YOUNG_THRESHOLD` allocations, in the driver and in every worker process
(each imports ``palm_search`` to unpickle its task). The simulator allocates millions of
short-lived objects, and at Python's default of 700 the collector ran some 3,500 times per screen
and took 10% of the default search's CPU (0.98 s of the 8.9 s screen, 0.97 s of the 7.7 s of
pictures, T-145B on the wafer, timed with ``gc.callbacks``; 0.33 s of the whole run's 2.07 s
remain, and its peak memory went from 273 to 288 MB): the cost is the cyclic garbage of at most
that many allocations, kept until the next collection. ``import simulator`` alone leaves the
collector as it is.
"""

import gc

GC_YOUNG_THRESHOLD = 50_000
"""Allocations (less deallocations) between collections of the youngest generation (Python's
default: 700; ``gc.set_threshold``); the older generations keep their defaults."""

gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
