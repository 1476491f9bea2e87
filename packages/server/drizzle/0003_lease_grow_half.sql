-- A lease grows by at most half of the scope's room (and at least by `p_min`): near a budget's end, the
-- first instance to lease no longer takes all that is left while the others find none and refuse requests
-- the budget has room for; each grow leaves room for the next instance, and what is left still goes, half
-- at a time, to whoever needs it.
CREATE OR REPLACE FUNCTION gw_budget_lease_grow(p_scope text, p_lease text, p_min bigint, p_max bigint, p_ttl_ms integer) RETURNS bigint
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
    v_grant := least(p_max::numeric, greatest(p_min::numeric, floor(v_room / 2)))::bigint;
  END IF;
  INSERT INTO budget_leases (scope_id, lease_id, nano, expires_at)
  VALUES (p_scope, p_lease, v_grant, now() + p_ttl_ms * interval '1 millisecond')
  ON CONFLICT (scope_id, lease_id) DO UPDATE SET nano = budget_leases.nano + EXCLUDED.nano, expires_at = EXCLUDED.expires_at;
  RETURN v_grant;
END
$$;
