"""Single sign-on with OpenID Connect: the authorization code flow with PKCE (client.py), users
and group-mapped memberships (services.py), and the login, callback and logout pages (views.py)."""
