-- Placeholder on the journal branch only: version 2 is the pools migration
-- being written on main. When merging, take main's 0002_pools.sql.
select 1;
