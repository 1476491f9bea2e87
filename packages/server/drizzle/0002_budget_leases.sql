CREATE TABLE "budget_leases" (
	"scope_id" text NOT NULL,
	"lease_id" text NOT NULL,
	"nano" bigint NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	CONSTRAINT "budget_leases_scope_id_lease_id_pk" PRIMARY KEY("scope_id","lease_id")
);
--> statement-breakpoint
-- Grows lease `p_lease` of scope `p_scope` ('ws:<id>' or 'key:<id>') by between `p_min` and `p_max`
-- (1e-9 EUR), as much as the scope's room allows: its stored budget less its stored spend and every live
-- lease, this one included. Returns what it added, 0 when not even `p_min` is left (or the scope is
-- unknown); the lease then lives `p_ttl_ms` from now. The scope's row is locked first, so leases of one
-- scope grow one at a time; the sum that follows runs on a new snapshot, which sees every lease and spend
-- committed while it waited. One row per call: no lock order to keep with the usage flush.
CREATE FUNCTION gw_budget_lease_grow(p_scope text, p_lease text, p_min bigint, p_max bigint, p_ttl_ms integer) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_id text := substr(p_scope, strpos(p_scope, ':') + 1);
  v_budget numeric;
  v_spent numeric;
  v_leased bigint;
  v_room numeric;
  v_grant bigint;
BEGIN
  IF p_scope LIKE 'ws:%' THEN
    SELECT budget, spent INTO v_budget, v_spent FROM workspaces WHERE id = v_id FOR UPDATE;
  ELSE
    SELECT budget, spent INTO v_budget, v_spent FROM api_keys WHERE id = v_id FOR UPDATE;
  END IF;
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
  DELETE FROM budget_leases WHERE scope_id = p_scope AND expires_at <= now();
  IF v_budget IS NULL THEN
    v_grant := p_max;
  ELSE
    SELECT coalesce(sum(nano), 0) INTO v_leased FROM budget_leases WHERE scope_id = p_scope;
    v_room := floor((v_budget - v_spent) * 1000000000) - v_leased;
    IF v_spent >= v_budget OR v_room < p_min THEN
      RETURN 0;
    END IF;
    v_grant := least(p_max::numeric, v_room)::bigint;
  END IF;
  INSERT INTO budget_leases (scope_id, lease_id, nano, expires_at)
  VALUES (p_scope, p_lease, v_grant, now() + p_ttl_ms * interval '1 millisecond')
  ON CONFLICT (scope_id, lease_id) DO UPDATE SET nano = budget_leases.nano + EXCLUDED.nano, expires_at = EXCLUDED.expires_at;
  RETURN v_grant;
END
$$;
