-- created_at, run_at and updated_at default to now(), the transaction's start.
--
-- Uniform batch creates (Store.task_create_uniform without timeouts) write their
-- rows by COPY, which takes no expressions: a new row's three times come from
-- these defaults, the same instant for all three and for every row of the
-- statement, as task_create_uniform's statement sets them (one clock read per
-- statement). now() is stable, not volatile, so COPY keeps its multi-row heap
-- insert (a volatile default would make it insert row by row). Every other
-- insert names the three columns and is unchanged.

ALTER TABLE tasks
    ALTER COLUMN created_at SET DEFAULT now(),
    ALTER COLUMN run_at SET DEFAULT now(),
    ALTER COLUMN updated_at SET DEFAULT now();
