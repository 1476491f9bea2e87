-- A grow refused for want of room tells why: -1 when the room could still come, 0 when it cannot. It could when
-- other live leases hold it (near a budget's end, room another instance leased and gives back after its next settle,
-- or costs of its own not yet stored), or when this lease holds costs already in the spend too (`p_slack`: the costs
-- settled on it not yet taken off, which leave it once their usage records are stored). Otherwise the budget less
-- its stored spend and this lease has not the room asked for, and nothing given back can make it. The ledger waits
-- a little for room on -1 and refuses at once on 0. A new function beside the five-argument one, which an instance
-- of a build before this keeps calling while both run.
CREATE FUNCTION gw_budget_lease_grow(p_scope text, p_lease text, p_min bigint, p_max bigint, p_ttl_ms integer, p_slack bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_id text := substr(p_scope, strpos(p_scope, ':') + 1);
  v_budget numeric;
  v_spent numeric;
  v_leased bigint;
  v_own bigint;
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
    SELECT coalesce(sum(nano), 0), coalesce(sum(nano) FILTER (WHERE lease_id = p_lease), 0) INTO v_leased, v_own
      FROM budget_leases WHERE scope_id = p_scope;
    v_room := floor((v_budget - v_spent) * 1000000000) - v_leased;
    IF v_spent >= v_budget THEN
      RETURN 0;
    END IF;
    IF v_room < p_min THEN
      IF v_room + (v_leased - v_own) + least(p_slack, v_own) >= p_min THEN
        RETURN -1;
      END IF;
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
