-- revisit schema, version 6: the previous listing's end, so "active origins"
-- can follow seed 000 (last modification between the previous listing and
-- the current one).

alter table listers add column previous_listing_finished_at timestamptz;
comment on column listers.previous_listing_finished_at is 'When the listing before the last one finished; with last_listing_finished_at it bounds the window of active origins';
