-- Less WAL per task: the search index of finished tasks is keyed by app.
--
-- An app id is unique platform-wide (the control plane's apps primary key) and
-- names one tenant, so the tenant_id in front of every tasks_finished entry (a
-- text) repeated what app_id already says, in every entry, written once per
-- finished task. The search queries still compare
-- tenant_id (a filter on the rows the index returns, all of the app's tenant).
DROP INDEX tasks_finished;
CREATE INDEX tasks_finished ON tasks (app_id, state, finished_at, task_id)
    WHERE finished_at IS NOT NULL;
