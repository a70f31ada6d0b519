-- revisit schema: cheaper scheduler bookkeeping (issue 13). No new column.
-- mark_scheduled returns each sent origin's loader arguments; almost every
-- listed origin has none ('{}'), so a probe of this small index answers for
-- most origins without reading listed_origins' heap.

create index listed_origins_with_arguments on listed_origins (url, visit_type)
  where extra_loader_arguments <> '{}'::jsonb;
comment on index listed_origins_with_arguments is 'Listings that carry loader arguments: mark_scheduled reads listed_origins only for the origins found here';
