/*
 * Eigen-Precision: small fixes to the theme's markup that CSS cannot make
 * (tools/check_browser.py runs axe-core on every page; _config.yml lists this file in
 * html_js_files).
 *
 * The bibliography: docutils writes <div role="list" class="citation-list"> whose
 * entries carry role="doc-biblioentry", a role ARIA 1.2 deprecates and axe-core does
 * not accept as a list's item (aria-required-children, critical; aria-deprecated-role).
 * Each entry becomes a list item, which is what it is.
 *
 * Names that hide the visible label (WCAG 2.5.3, label in name; axe-core's
 * label-content-name-mismatch): MyST-NB's toggles read "Show code cell source" but are
 * named "Toggle hidden content", and the titles of the theme's colour-mode icons
 * ("Light", "Dark", "System Settings") count as the visible text of a button named
 * "Color mode". The toggles keep their visible text as their name; the icons become
 * decorative, without titles (the button keeps its name and its tooltip), whether Font
 * Awesome has already turned them into <svg>s with <title>s or does so later (its
 * deferred script and this one race: CI once failed on a page where it ran first).
 *
 * The navigation's toggles for a chapter's sections (a chapter with a details page)
 * are a bare chevron: a screen reader announces a disclosure with no name
 * (summary-name, serious). Each is named after its chapter: "Sections of <chapter>".
 */
(function () {
  "use strict";
  function fixCitationLists() {
    document.querySelectorAll('.citation-list[role="list"] > .citation').forEach((entry) => {
      entry.setAttribute("role", "listitem");
    });
  }
  function fixNames() {
    document.querySelectorAll("details > summary[aria-label]").forEach((summary) => {
      if (summary.textContent.trim()) summary.removeAttribute("aria-label");
    });
    document.querySelectorAll(".theme-switch-button").forEach((button) => {
      decorativeIcons(button);
      // Font Awesome may write its <svg>s (with the titles it read) after this has run.
      new MutationObserver(() => decorativeIcons(button)).observe(button, {
        childList: true,
        subtree: true,
      });
    });
  }
  function decorativeIcons(button) {
    // Before Font Awesome: its <i title="…">; after it: <svg aria-labelledby> + <title>.
    button.querySelectorAll(":scope > i, :scope > svg").forEach((icon) => {
      icon.setAttribute("aria-hidden", "true");
      icon.removeAttribute("title");
      icon.removeAttribute("aria-labelledby");
      icon.querySelectorAll("title").forEach((title) => title.remove());
    });
  }
  function nameTocToggles() {
    document.querySelectorAll("li.has-children > details > summary").forEach((summary) => {
      const link = summary.parentElement.parentElement.querySelector(":scope > a");
      if (!summary.textContent.trim() && !summary.getAttribute("aria-label") && link) {
        summary.setAttribute("aria-label", `Sections of ${link.textContent.trim()}`);
      }
    });
  }
  function fix() {
    nameTocToggles();
    fixCitationLists();
    fixNames();
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", fix);
  } else {
    fix();
  }
})();
