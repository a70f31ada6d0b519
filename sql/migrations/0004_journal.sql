-- revisit schema, version 4: what the journal client needs to fold visit
-- statuses in any order (issue 5), and what lanes and change-rate learning read.

alter table origin_visit_stats
  add column last_eventful      timestamptz,
  add column next_visit_anchor  timestamptz,
  add column visit_history      bytea;

comment on column origin_visit_stats.last_eventful is 'Date of the last visit that found new content (in visit order); change-rate learning reads it';
comment on column origin_visit_stats.next_visit_anchor is 'Queue position when the newest final visit was first recorded; next_visit_queue_position = anchor + fudged interval';
comment on column origin_visit_stats.visit_history is 'msgpack [1, base, recent]: the newest final visits (visit, date, status, snapshot, duration_s) and the tally of older ones, to refold when a status arrives late; see app/db/history_codec.py';

comment on column origin_visit_stats.last_visit_number is 'Visit number of the newest final visit (visit order)';
comment on column origin_visit_stats.last_final_date is 'Latest date of a final status (visit reported); a visit scheduled after it is in flight';
comment on column origin_visit_stats.successive_visits is 'Number of successive final visits with the same status, newest included';
comment on column origin_visit_stats.failures_in_a_row is 'Failed or not_found visits since the last successful one (from the visit history)';
comment on column origin_visit_stats.last_duration_s is 'Duration in seconds of the newest final visit that reported one (metadata.duration_s)';

-- Journal batches rewrite whole rows; free space in each page lets PostgreSQL
-- keep the new version on the same page without touching the indexes (HOT).
alter table origin_visit_stats set (fillfactor = 80);
