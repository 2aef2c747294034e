"""Results history across commits: runs stored in a database, trends, change points, and a gate against the
last stable segment.

    db.py           where the history lives: SQLite (a file, the default) or PostgreSQL (a fleet of runners),
                    one DB-API seam with a thin dialect layer; every failure to open or write is one NnbenchError
    migrations.py   the versioned schema (schema_version table); a newer database is refused
    source.py       results files in, records out; the one adapter that knows where raw samples and energy sit
    store.py        record runs, read the per-commit series of each case
    changepoints.py E-divisive means (Hunter/Apache Otava's split/merge variant) over a case's series
    trend.py        series + change points -> trends and the last stable segment
    figures.py      one PNG per case
    gate.py         `check --against-history`: the current run against each case's last stable segment

Data flows one way: CLI -> source -> store -> trend -> (table, figures, gate).
"""
