-- revisit schema: a lister's full listing as a request, the first step of the
-- add forge now workflow (seed 004's workflows, issue 36). Such a request has a
-- lister instead of a visit type: no scheduler sends it and no visit ends it;
-- the lister run ends it, releasing the first visits that wait for it.

alter table visit_requests alter column visit_type drop not null;
alter table visit_requests add column lister_id uuid references listers (id);
alter table visit_requests add constraint visit_requests_visit_or_listing
  check ((visit_type is null) <> (lister_id is null));
comment on column visit_requests.visit_type is 'Type of the visit asked for; null for a lister''s listing (lister_id)';
comment on column visit_requests.lister_id is 'The lister whose next full listing this request is (add forge now); null for a visit';

create index visit_requests_open_listing on visit_requests (lister_id)
  where lister_id is not null and status = 'running';
create index visit_requests_by_parent on visit_requests (parent) where parent is not null;
