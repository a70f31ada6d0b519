-- revisit schema: age_optimal becomes the default of git, hg and svn too
-- (issue 17).
-- Version 3 seeded these three visit types with the reference scheduler's
-- weights (49/49/2), so they never ran the project's default policy
-- (app.domain.policies.DEFAULT_POLICIES), which applies to a visit type with
-- no policy rows. The seeded rows are removed where they are still exactly
-- the seed; a visit type whose policies an operator changed keeps them. The
-- reference's weights stay one `revisit policy set` away.

delete from scheduling_policies sp
using (
  select visit_type
  from scheduling_policies
  group by visit_type
  having count(*) = 3
     and bool_and(
           (policy, weight) in (('already_visited_order_by_lag', 49.0),
                                ('never_visited_oldest_update_first', 49.0),
                                ('origins_without_last_update', 2.0)))
) seeded
where sp.visit_type = seeded.visit_type
  and sp.visit_type in ('git', 'hg', 'svn');
