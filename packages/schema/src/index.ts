export * from './admin.js';
export * from './chat.js';
export * from './config.js';
export * from './error-schema.js';
export * from './errors.js';
export * from './headers.js';
export * from './models.js';
export * from './patterns.js';
