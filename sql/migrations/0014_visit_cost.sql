-- revisit schema: the age-optimal allocation weighs each origin's visit cost
-- (issue 17). An origin whose visits take a times the typical visit's worker
-- time is planned with a times the multiplier (h(λI) = μ a λ²): the workers'
-- time goes where it buys the most freshness. The typical cost is measured
-- once, when the visit type's first multiplier is solved, and kept (the
-- lateness controller corrects the multiplier's scale; a moving reference
-- would move every plan at once).

alter table visit_types add column visit_cost_reference_s double precision;
comment on column visit_types.visit_cost_reference_s is 'Typical worker time of a visit that fetches nothing (median over a sample of origins of their uneventful visits'' durations, measured once the first age-optimal multiplier is solved, s); null while unknown: every origin then counts alike';
