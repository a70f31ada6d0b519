-- revisit schema: order-safe mirror placements (issue 14).
-- Every change of an origin_visit_stats row bumps its version in the same
-- transaction (a trigger, so no writer can forget it). Each placement in the
-- Redis mirror carries the version of the row it was derived from, and
-- queues/lua/place.lua refuses a placement older than the one the mirror
-- holds: two journal clients (or a journal client and a rebuild) that reach
-- Redis in the opposite order to their commits cannot leave the older place.

alter table origin_visit_stats add column version bigint not null default 1;
comment on column origin_visit_stats.version is 'Update counter of the row (1 when inserted, +1 on every update, by trigger): the mirror keeps the place of the highest version it was given';

create function origin_visit_stats_bump_version() returns trigger
language plpgsql as $$
begin
  new.version := old.version + 1;
  return new;
end
$$;
comment on function origin_visit_stats_bump_version() is 'Bumps origin_visit_stats.version on every update of a row';

create trigger origin_visit_stats_version before update on origin_visit_stats
  for each row execute function origin_visit_stats_bump_version();
comment on trigger origin_visit_stats_version on origin_visit_stats is 'Keeps version counting the row''s updates, whoever writes it';
