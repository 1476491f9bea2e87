/**
 * A value kept on an object under a non-enumerable symbol: spreads,
 * `Object.keys` and JSON never see it, so a copy does not carry it. Used
 * where a WeakMap entry per object (a chunk, a request's reservation) cost
 * the collector ephemeron work on every young object.
 */
export interface HiddenSlot<O extends object, V> {
  set(target: O, value: V): O;
  get(target: O): V | undefined;
}

export function hiddenSlot<O extends object, V>(name: string): HiddenSlot<O, V> {
  const key = Symbol(name);
  return {
    set(target, value) {
      Object.defineProperty(target, key, { value });
      return target;
    },
    get: (target) => (target as { [key]?: V })[key],
  };
}
