"""Writes what Python's logging module writes for a service that logs
requests and, now and then, an exception with its traceback (chained
ones included): the log text to argv[1], and each record as the formatter
made it to argv[2], NUL-separated, for the multiline test to compare."""

import logging
import sys

records = []


class Keep(logging.Handler):
    def emit(self, record):
        records.append(self.format(record))


fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
to_file = logging.FileHandler(sys.argv[1], mode="w")
keep = Keep()
for h in (to_file, keep):
    h.setFormatter(fmt)
log = logging.getLogger("app")
log.setLevel(logging.INFO)
log.addHandler(to_file)
log.addHandler(keep)


def lookup(table, key):
    return table[key]


for i in range(int(sys.argv[3])):
    if i % 7 == 3:
        try:
            try:
                lookup({}, f"user-{i}")
            except KeyError:
                print(1 / 0)
        except ZeroDivisionError:
            log.exception("request %d failed", i)
    elif i % 11 == 5:
        try:
            try:
                open(f"/nonexistent/request-{i}")
            except OSError as e:
                raise ValueError(f"bad value {i}") from e
        except ValueError:
            log.exception("request %d rejected", i)
    else:
        log.info("request %d served in %d ms", i, i % 13)

to_file.close()
with open(sys.argv[2], "w") as f:
    f.write("\0".join(records))
