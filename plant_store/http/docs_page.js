// Swagger UI on the service's own document. A file, not an inline script, so the page's
// Content-Security-Policy can forbid inline scripts.
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "openapi.json",  // relative to the page: /api/docs loads /api/openapi.json
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,  // no badge from the public validator: the page makes no remote call
  });
});
