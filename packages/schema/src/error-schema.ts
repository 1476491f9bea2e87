import { Type } from '@sinclair/typebox';
import { CANONICAL_ERRORS, type Variant } from './errors.js';

/** The error envelope of one variant, its codes enumerated. */
export function errorEnvelopeSchema(variant: Variant) {
  const codes = [...new Set(Object.values(CANONICAL_ERRORS).map((e) => e[variant][1]))];
  return Type.Object(
    {
      error: Type.Object({
        message: Type.String(),
        type: Type.String(),
        code: Type.Union(codes.map((c) => Type.Literal(c))),
        param: Type.Union([Type.String(), Type.Null()]),
      }),
    },
    { title: variant === 'a' ? 'ErrorA' : 'ErrorB' },
  );
}
