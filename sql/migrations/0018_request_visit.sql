-- revisit schema: a request remembers the visit made for it, so only that
-- visit's end ends it (a visit already under way when it was scheduled does not).

alter table visit_requests add column visit bigint;
comment on column visit_requests.visit is 'Journal visit number of the request''s own visit: the first visit of its origin created after it was scheduled; only that visit''s final status ends the request';
