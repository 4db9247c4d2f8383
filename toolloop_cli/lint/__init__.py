"""``toolloop validate`` below the command line: which files to check (``discover``), checking
registries and plans with the same admission as ``run`` (``check``), the lock file
(``lockfile``) and which findings a project chose to leave out (``suppress``)."""
