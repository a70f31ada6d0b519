-- revisit schema: one index fewer for a listing import to write (issue 35).
-- listed_origins_lister (lister_id, visit_type) served the queries that read
-- one lister's origins: the first visits after a listing, the end of a full
-- listing (count_unseen, disable_unseen) and a lister's visit types. Every
-- one of them filters on lister_id, which leads listed_origins_lister_url
-- (lister_id, url, visit_type) too: that index serves them as well, and an
-- import then updates two indexes of listed_origins per new origin instead
-- of three. No column changes.

drop index listed_origins_lister;
comment on index listed_origins_lister_url is 'Serves get_listed_origins (a lister''s origins paged in (lister_id, url, visit_type) order) and every query reading one lister''s origins: first_visits_after_listing, the end of full listings, a lister''s visit types';
